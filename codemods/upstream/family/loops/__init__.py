"""Layer loops of a decoder stack's forward: the one table of loop forms every shape asks
(``forms``) and the classic loop shape's rewrite (``rewrite``)."""
