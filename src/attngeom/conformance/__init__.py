"""The generated conformance run: every model_type of the installed transformers, scored or refused."""
