"""pygls's protocol, hardened: a request whose params do not match the LSP types gets an
InvalidParams error response (pygls alone logs it and never answers, leaving the client waiting).
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol

log = logging.getLogger(__name__)

# handle_message ignores messages whose jsonrpc is not "2.0": the answer was already sent.
_ANSWERED = SimpleNamespace(jsonrpc="answered")


class RobustProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as err:
            method = data.get("method") if isinstance(data, dict) else None
            if isinstance(data, dict) and "id" in data and method:
                log.warning("invalid params for %s (id %s)", method, data.get("id"))
                error = JsonRpcInvalidParams(f"invalid params for {method}: {err.message}")
                self._send_response(data["id"], error=error.to_response_error())
            else:
                log.warning("ignoring a malformed %s notification", method or "unknown")
            return _ANSWERED
