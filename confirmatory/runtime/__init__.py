"""What the moving parts share with the operating system: the clock that never
goes backwards and child processes that never outlive the runner."""
