"""Maps the top-level folders under one import root: envs/ -> agentgym.envs, and so on.

Metadata lives in pyproject.toml; only the package layout is computed here, because
setuptools' declarative config cannot prefix discovered sub-packages.
"""
from setuptools import find_packages, setup

MAPPED = {"agentgym": "agentgym", "agentgym.envs": "envs", "agentgym.tools": "tools",
          "agentgym.policies": "policies", "agentgym.train": "train"}

packages, package_dir = [], {}
for name, folder in MAPPED.items():
    packages.append(name)
    package_dir[name] = folder
    for sub in find_packages(folder):
        if name == "agentgym" and sub.split(".")[0] in {"envs", "tools", "policies", "train"}:
            continue
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
