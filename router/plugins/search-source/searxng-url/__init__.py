"""search-source ``searxng-url``: a SearXNG instance's JSON API at a URL.

Options (``options.search-source.searxng-url`` in ``plugins.json``)::

    {"url": "http://127.0.0.1:8888", "max_results": 10}

A search is ``GET <url>/search?q=<query>&format=json`` through
``httpx.AsyncClient`` (which runs on Trio). The broker's deadline cancels
the request: the client is closed inside the cancelled scope. SearXNG's
answer ``{"query", "number_of_results", "results": [{"title", "url",
"content"}]}`` becomes ``{"query", "total", "results": [{"title", "url",
"snippet"}]}``; ``total`` is SearXNG's estimate when it gives one (it answers 0
when it has none), else the number of results. Results without a URL are
dropped; at most ``max_results`` (default 10, at most 100) are kept.

Refusals: ``searxng-url-missing``, ``searxng-unreachable``,
``searxng-http-error`` (a 403 usually means the instance does not serve the
``json`` format: add it to ``search.formats`` in its settings.yml),
``searxng-bad-answer``.
"""

import json
import urllib.parse

import httpx

from router.errors import Refusal

INTERFACE_VERSION = 1

#: The most bytes of an answer parsed; SearXNG's page of results is far less.
MAX_ANSWER_BYTES = 4 * 1024 * 1024


def _text(value):
    return value if type(value) is str else ""


def _endpoint(options):
    """The SearXNG address from the options, and how many results to keep."""
    url = options.get("url")
    if type(url) is not str or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise Refusal(
            "searxng-url-missing",
            "set options.search-source.searxng-url.url to the SearXNG address "
            '("http://host:port") with `router plugins set`',
        )
    limit = options.get("max_results", 10)
    if type(limit) is not int or not 1 <= limit <= 100:
        limit = 10
    return url, limit


async def _fetch(url, query):
    """The answer's body, at most ``MAX_ANSWER_BYTES``, after a 200."""
    try:
        async with httpx.AsyncClient(follow_redirects=False) as client:
            async with client.stream(
                "GET", url.rstrip("/") + "/search", params={"q": query, "format": "json"},
                headers={"Accept": "application/json"},
            ) as response:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        raise Refusal("searxng-bad-answer",
                                          f"SearXNG's answer passed {MAX_ANSWER_BYTES} bytes")
    except httpx.HTTPError as exc:
        raise Refusal(
            "searxng-unreachable", f"SearXNG at {url} did not answer: {type(exc).__name__}: {exc}"
        ) from None
    if response.status_code != 200:
        hint = (" (does it serve the json format? add json to search.formats)"
                if response.status_code == 403 else "")
        raise Refusal(
            "searxng-http-error", f"SearXNG at {url} answered {response.status_code}{hint}"
        )
    return body


def _results(answer, limit):
    results = []
    for item in answer["results"]:
        if type(item) is not dict or type(item.get("url")) is not str or not item["url"]:
            continue
        results.append({
            "title": _text(item.get("title")),
            "url": item["url"],
            "snippet": _text(item.get("content")),
        })
        if len(results) == limit:
            break
    return results


async def search(options, query, deps):
    url, limit = _endpoint(options)
    body = await _fetch(url, query)
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        raise Refusal("searxng-bad-answer", f"SearXNG at {url} did not answer JSON") from None
    if type(answer) is not dict or type(answer.get("results")) is not list:
        raise Refusal("searxng-bad-answer", f"SearXNG at {url} answered no results list")
    results = _results(answer, limit)
    estimate = answer.get("number_of_results")
    if type(estimate) is float and estimate.is_integer():
        estimate = int(estimate)
    total = estimate if type(estimate) is int and estimate >= len(results) else len(results)
    return {"query": query, "total": total, "results": results}
