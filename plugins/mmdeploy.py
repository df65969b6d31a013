"""Remedies ``mmdeploy``: OpenMMLab (mmdeploy / mmcv) custom ops and the OpenVINO-named
detection ops exported next to them."""
