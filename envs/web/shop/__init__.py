"""The generated shop: catalogue, goals and reward, pages (site.py), the ASGI app and its server."""
