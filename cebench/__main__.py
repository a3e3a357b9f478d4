"""`python -m cebench` runs the command-line interface."""
from cebench.cli import main

main()
