"""Hand-written architecture maps, kept only where discovery cannot see what a checkpoint holds: each
``Architecture`` says why (``why``). ``registry.TABLES`` names the module of each ``model_type``."""
