"""The command line: parse → call convgit.api → render. The only package importing typer/rich."""
