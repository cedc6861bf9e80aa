"""Client of the environment-service HTTP protocol (docs/data.md, "Environment services")."""

from astuner.env_service.client import EnvServiceClient
from astuner.env_service.handle import EnvHandle

__all__ = ["EnvServiceClient", "EnvHandle"]
