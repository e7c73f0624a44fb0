"""The summary: runs -> claims' verdicts and tables (compute here), shown by show/ (terminal, Markdown, HTML, plots, TensorBoard)."""
