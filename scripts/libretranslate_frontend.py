"""LibreTranslate's own web front end in front of `seq2onnx serve`, as a reverse proxy would put it (its page asks its
own origin for /frontend/settings, /languages, /translate and /detect).

    pip download libretranslate --no-deps -d /tmp/lt          # its wheel: templates and static files
    seq2onnx serve numbers-en-de --port 8000 &
    python scripts/libretranslate_frontend.py /tmp/lt/libretranslate-*.whl --server http://127.0.0.1:8000 --port 5000
    # then http://127.0.0.1:5000/?source=auto&target=de&q=twenty%20three

It renders the wheel's index.html and app.js.template with Jinja2 (English, no API-key secret: what LibreTranslate
renders for `--url-prefix ''`), serves them and the static files from a temporary folder, and forwards every other
path to --server. A demonstration for docs/libretranslate-frontend.png, not a production proxy (use nginx).
"""
from __future__ import annotations

import argparse
import http.server
import json
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

from markupsafe import escape

PAGES = ("/", "/index.html", "/js/app.js")
FORWARDED_HEADERS = ("Content-Type", "Content-Length")


def _(text: str, **values: object) -> str:
    return text % values if values else text


def render(wheel: Path, out: Path) -> None:
    import jinja2

    with zipfile.ZipFile(wheel) as z:
        z.extractall(out / "wheel")
    package = out / "wheel" / "libretranslate"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(package / "templates"))
    env.globals.update(_=_, _e=lambda text, **v: json.dumps(_(text, **v)), _h=lambda text, **v: str(escape(_(text, **v))),
                       url_for=lambda endpoint, filename="": f"/static/{filename}" if endpoint == "static" else "/")
    context = dict(url_prefix="", current_locale="en", available_locales=[{"code": "en", "name": "English"}],
                   alternate_locales=[], version="1", swagger_url="/docs", api_secret="", bogus_api_secret="")
    (out / "site" / "js").mkdir(parents=True)
    (out / "site" / "index.html").write_text(env.get_template("index.html").render(**context), encoding="utf-8")
    (out / "site" / "js" / "app.js").write_text(env.get_template("app.js.template").render(**context),
                                                 encoding="utf-8")
    shutil.copytree(package / "static", out / "site" / "static")


def handler(site: Path, server: str) -> type:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(site), **kwargs)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in PAGES or path.startswith("/static/"):
                return super().do_GET()
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if self.command == "POST" else None
            request = urllib.request.Request(server + self.path, data=body, method=self.command,
                                             headers={h: self.headers[h] for h in FORWARDED_HEADERS if self.headers[h]})
            try:
                with urllib.request.urlopen(request, timeout=120) as r:
                    status, headers, data = r.status, r.headers, r.read()
            except urllib.error.HTTPError as e:
                status, headers, data = e.code, e.headers, e.read()
            self.send_response(status)
            self.send_header("Content-Type", headers.get("Content-Type", "application/json"))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("wheel", type=Path, help="LibreTranslate's wheel (pip download libretranslate --no-deps)")
    p.add_argument("--server", default="http://127.0.0.1:8000", help="the seq2onnx server's URL")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        render(args.wheel, Path(tmp))
        site = Path(tmp) / "site"
        httpd = http.server.ThreadingHTTPServer((args.host, args.port), handler(site, args.server.rstrip("/")))
        print(f"LibreTranslate's front end on http://{args.host}:{args.port}/ for {args.server}", flush=True)
        httpd.serve_forever()


if __name__ == "__main__":
    main()
