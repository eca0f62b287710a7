"""``python -m confirmatory``: the same command line as ``confirmatory`` (cli/main.py)."""

from confirmatory.cli.main import main

if __name__ == "__main__":
    main(prog_name="confirmatory")
