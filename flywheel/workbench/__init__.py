"""The annotation workbench: one web application where people annotate, record and audit in a browser.

`flywheel workbench serve` runs it (FastAPI + uvicorn, 127.0.0.1 by default) over the lake and the landing area.
See docs/workbench.md. Modules: `store` (accounts and assignments), `auth` (sessions, CSRF, roles), `live` (the
remote screen: environments that run on the server), `proposals` (the newest checkpoint's proposals),
`sessions` (a finished live session -> the annotation format -> the lake), `app` (the routes and pages).
"""
