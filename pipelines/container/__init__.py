"""The code that runs inside every Kubeflow pipeline step (the pod), apart from the
compile-time code in imgpipe.pipelines.kubeflow; the two share only kfp_contract.py (the
names they agree on) and tfx_patches.py (the patches of TFX's private code)."""
