"""The trajectory viewer: `astuner view RUN` and `--with-logview` serve a run folder's metrics and
trajectories as web pages (standard library HTTP server, a page with no build step, nothing from a CDN)."""

from astuner.viewer.server import ViewerServer, serve_forever, start_viewer

__all__ = ["ViewerServer", "serve_forever", "start_viewer"]
