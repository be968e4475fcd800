"""Test support for running real SGLang release code on a CPU-only machine.

``env``    downloads ``sglang==X`` wheels (no dependencies) into a cache, unpacks them once,
           and builds the environment (``PYTHONPATH``) under which a subprocess imports the
           unpacked tree with the stand-in modules in ``stubs/``.
``stages`` builds pipeline-stage instances of real SGLang model classes the way SGLang's own
           CPU tests do (``object.__new__`` + ``nn.Module.__init__``), from one table of
           model shapes, with the shipped test utilities' stand-ins; ``stage_check``
           drives them as ``codemods.ppcheck`` ranks and compares them with PP=1.
"""
