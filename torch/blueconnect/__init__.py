"""BlueConnect's Python packages. `import blueconnect.torch` registers the
torch.distributed backend "blueconnect" (docs/TORCH.md)."""
