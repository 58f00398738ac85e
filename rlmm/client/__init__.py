"""rlmm's API as Python sees it: ``RlmmClient`` (``calls``), the typed client of the gRPC service, and
``convert``, between the API's messages and rlmm's records, which the server uses too."""

from rlmm.client.calls import RlmmClient

__all__ = ["RlmmClient"]
