"""cxlkv as a KV-offloading backend of vLLM (OffloadingConnector).

    kv_transfer_config={"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"spec_name": "CxlkvOffloadingSpec",
                                      "spec_module_path": "cxlkv.vllm"}}

or, so that corrupt chunks are recomputed rather than fatal, the connector
subclass in cxlkv.vllm.connector (docs/vllm.md). Importing this module opens
no region: vLLM's API server imports it only to read the metric definitions.
"""

from .spec import CxlkvOffloadingSpec  # noqa: F401

__all__ = ["CxlkvOffloadingSpec"]
