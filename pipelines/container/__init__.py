"""The code that runs inside every Kubeflow pipeline step (the pod), apart from the
compile-time code in imgpipe.pipelines.kubeflow; the two share kfp_contract.py only."""
