"""Discovery: the attention layout of a ``model_type`` read off the model itself (``attention``), turned
into the ``Architecture`` the engine consumes (``discovered``), used for the types the generated conformance
run validated (``validated``, from ``support.json``)."""
