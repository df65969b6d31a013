"""Target ``openvino``: OpenVINO's CPU device (optional dependency)."""
