"""The command line: the click commands, the preflight and the progress display."""
