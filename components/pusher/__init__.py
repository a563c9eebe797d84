"""ImagePusher: TFX's Pusher, publishing each push whole (see executor.py)."""
