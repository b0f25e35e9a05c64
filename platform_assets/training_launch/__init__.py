"""Launching the training job (training/) from the platform: settings and the torchrun command."""
