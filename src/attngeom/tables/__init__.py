"""Table writers, at the bottom of the house: a table as CSV at full precision, Markdown, LaTeX and a
sortable HTML page. The report, the run statistics and the pipeline all write their tables through them."""
