"""How a summary is shown: the terminal and Markdown/CSV/JSON (report), HTML, plots, TensorBoard. Display only: nothing here computes a verdict."""
