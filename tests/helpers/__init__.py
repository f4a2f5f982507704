"""The tests' helpers, one package: ``cli`` (the CLI runners and fixtures: ``cli``, ``run``,
``proj``...), ``store`` (stores built through the library, their snapshots), ``serve`` (the
real ``convgit serve`` process and a fake upstream), ``s3`` (a real SeaweedFS), ``pg`` (a
real PostgreSQL server), ``embeddings`` (a real OpenAI-compatible embeddings server), ``doc_commands`` (the commands
the docs show, read from the markdown)."""
