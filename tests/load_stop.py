"""run and serve stopped where they would load the model pair: the LoadOptions their flags
made, without a model loaded (for tests of what a command line reaches)."""

from __future__ import annotations

from specgguf_cli import options as o
from specgguf_cli import serve_cmd

from specgguf.errors import SpecggufError

#: the exit status of a command stopped where it would load
STOPPED = 99


class Loaded(SpecggufError):
    """Where the session would load: the LoadOptions the flags made."""


def stop_at_load(monkeypatch, tmp_path) -> list:
    """Patch run/serve (and serve's router mode) to stop with STOPPED where they would load;
    returns the list each stop appends its LoadOptions to."""
    seen: list = []

    def open_session(self, model, model_draft, types, n_max, **kw):
        seen.append(self.load_options(model, model_draft))
        raise Loaded("stopped before loading", STOPPED)

    def models_dir(routing, flags, *args):  # router mode: where its models would start
        seen.append(flags.load_options(tmp_path / "t.gguf", None))
        raise Loaded("stopped before routing", STOPPED)

    monkeypatch.setattr(o.SessionFlags, "open_session", open_session)
    monkeypatch.setattr(serve_cmd, "serve_models_dir", models_dir)
    return seen
