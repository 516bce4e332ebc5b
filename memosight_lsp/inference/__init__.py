"""Token ids in, token ids out: model loading, KV cache, heads, drafting, verification."""

import os

# Nothing may reach a hub, whatever the environment says: models come from local folders only.
# Set here, before any engine module imports transformers: huggingface_hub reads these once,
# when it is first imported.
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_name] = "1"
