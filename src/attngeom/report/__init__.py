"""What a reader sees: the per-model summary, the paper's tables and figures, and a results folder read
back for a notebook. Everything here reads records and run logs; nothing computes a score or trains."""
