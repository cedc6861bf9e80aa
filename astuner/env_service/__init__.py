"""Client of the environment-service HTTP protocol (see README, "Environment services")."""

from astuner.env_service.client import EnvServiceClient

__all__ = ["EnvServiceClient"]
