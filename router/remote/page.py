"""The pairing page a phone opens (``GET /pair#CODE``): small, no assets.

Its script reads the code from the URL's fragment (which the browser never
sends), removes it from the address bar and the history, posts it
(``POST pair``, relative, so a proxy's base path holds) and, once the router
answered with the device's cookie, goes to the board (``./``). A refusal is
shown as the router's sentence. The router's CA certificate is linked
(``pair/ca.pem``) for a phone that has still to install it (docs/remote.md).
"""

from __future__ import annotations

from typing import Final

__all__ = ["PAIR_PAGE"]

PAIR_PAGE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Pair this device · router</title>
<style>
body { font: 17px/1.45 system-ui, sans-serif; margin: 0; padding: 24px; max-width: 32em; }
h1 { font-size: 1.3em; }
#status { padding: 12px; border-radius: 8px; background: #eef; }
#status.bad { background: #fee; }
#status.ok { background: #efe; }
a { color: #0645ad; }
</style>
</head>
<body>
<h1>Pair this device with the router</h1>
<p id="status" role="status">Pairing…</p>
<p><small>The first time: install the router's certificate authority on this phone
(<a id="ca" href="pair/ca.pem" download="router-ca.pem">router-ca.pem</a>), then scan the code again.
The steps for iPhone and Android are in the router's docs/remote.md.</small></p>
<script>
(function () {
  var status = document.getElementById('status');
  function show(text, kind) { status.textContent = text; status.className = kind || ''; }
  var code = decodeURIComponent(location.hash.replace(/^#/, ''));
  history.replaceState(null, '', location.pathname + location.search);
  if (!code) { show('No pairing code in this address: run `router pair` on the router and scan its code.', 'bad'); return; }
  fetch('pair', {method: 'POST', credentials: 'same-origin', headers: {'Content-Type': 'application/json'},
                 body: JSON.stringify({code: code})})
    .then(function (response) {
      return response.json().then(function (body) { return {ok: response.ok, body: body}; });
    })
    .then(function (answer) {
      if (!answer.ok) { show(answer.body.message || 'The router refused this code.', 'bad'); return; }
      show('Paired as "' + answer.body.device.name + '". Opening the board…', 'ok');
      document.body.setAttribute('data-paired', answer.body.device.name);
      location.replace('./');
    })
    .catch(function (error) { show('The router could not be reached: ' + error, 'bad'); });
})();
</script>
</body>
</html>
"""
