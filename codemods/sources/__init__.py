"""Which files a run reads, the one reader and writer, and the byte-level prefilter."""
