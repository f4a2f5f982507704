"""One library surface: ``convgit.__all__`` is ``convgit.api.__all__`` (plus ``__version__``),
it names every public function of api, and it covers the maintenance operations."""

import inspect

import convgit
from convgit import api


def test_package_and_api_agree():
    assert sorted(convgit.__all__) == sorted(["__version__", *api.__all__])
    assert len(set(api.__all__)) == len(api.__all__)
    for name in api.__all__:
        assert getattr(convgit, name) is getattr(api, name), name


def test_every_public_function_of_api_is_exported():
    defined = {n for n, v in vars(api).items()
               if not n.startswith("_") and inspect.isfunction(v) and v.__module__ == api.__name__}
    assert sorted(defined - set(api.__all__)) == []


def test_the_surface_covers_maintenance():
    for name in ("gc", "fsck", "merge", "bundle_create", "bundle_verify", "reindex"):
        assert name in convgit.__all__ and callable(getattr(convgit, name))


def test_every_exported_name_exists():
    for name in convgit.__all__:
        assert hasattr(convgit, name), name


def test_functions_keep_their_names_after_their_modules_load():
    """``convgit.gc`` is the function even after ``api.gc`` has imported ``convgit.gc``."""
    import importlib

    for name in ("commit", "export", "fsck", "gc", "merge"):
        importlib.import_module(f"convgit.{name}")
        assert getattr(convgit, name) is getattr(api, name), name
