"""Pure decisions and values: the rules, the host rules, the draws, money, the errors and redaction.

No I/O, no threads, no clock: everything here is a function of its arguments,
importable without litellm, psutil or the file system."""
