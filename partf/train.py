"""`python -m partf.train`: the same command as `partf-train` (see partf/cli/train.py)."""

from partf.cli.train import run

if __name__ == "__main__":
    run()
