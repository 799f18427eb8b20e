"""Tool back ends shared by envs: retrieval, sandboxes (docker, bubblewrap), shell, editor, browser."""
