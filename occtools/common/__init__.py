"""What the occtools commands share: running commands (proc), reading their outputs (files)."""
