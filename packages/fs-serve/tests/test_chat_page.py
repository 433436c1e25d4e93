"""The chat page at ``/`` (ui/index.html). Here: it is served, self-contained (no external URL, a CSP that forbids
any other origin) and can be switched off. ``nox -s ui`` drives it in a real headless Chromium
(test_chat_page_in_a_browser, marked ``ui``): streaming, Stop, the system prompt, folded thinking, the stats line."""

import re
from pathlib import Path

import httpx
import pytest

from serving import Scripted, start


def test_the_page_is_served_self_contained_and_can_be_turned_off(server, tiny):
    r = httpx.get(f"{server.url}/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "connect-src 'self'" in r.headers["content-security-policy"]
    assert not re.findall(r"(?:src|href)=\"(?:https?:)?//", r.text) and "http://" not in r.text.replace(
        "http://www.w3.org", ""
    )  # nothing fetched from elsewhere: the page works offline
    for route in ("/v1/chat/completions", "/v1/models"):
        assert route in r.text
    s = start(*tiny, ui=False)
    try:
        assert httpx.get(f"{s.url}/").status_code == 404
    finally:
        s.stop()


def chromium():
    """The browser ``nox -s ui`` drives: $FS_CHROMIUM, else Debian's chromium."""
    import os
    import shutil

    path = os.environ.get("FS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("no Chromium: apt install chromium, or set FS_CHROMIUM to a Chromium binary")
    return path


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is in the ui group: nox -s ui")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield b
        b.close()


SHOTS = Path(__file__).resolve().parents[3] / "ui-screenshots"


@pytest.mark.ui
def test_chat_page_in_a_browser(browser, tiny, demo_server):
    SHOTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1100, "height": 700})
    page.goto(demo_server.url + "/")
    page.wait_for_selector("#model:has-text('fs-demo')")  # locators, not evaluated JS: the page's CSP forbids eval
    page.fill("#system", "Be brief.")
    page.fill("#temperature", "0")
    page.fill("#max_tokens", "24")
    page.fill("#prompt", "What is a list?")
    page.press("#prompt", "Enter")
    page.wait_for_selector(".assistant .stats[data-done]", timeout=60_000)
    answer = page.inner_text(".assistant .text")
    stats = page.inner_text(".assistant .stats")
    page.screenshot(path=str(SHOTS / "answer.png"))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a list?"}]
    thinking = {"chat_template_kwargs": {"enable_thinking": True}}
    want = demo_server.client().chat.completions.create(model="fs-demo", temperature=0, max_tokens=24,
                                                        messages=messages, extra_body=thinking)  # fmt: skip
    assert answer == want.choices[0].message.content.lstrip()  # the server's answer (shown without leading blanks)
    assert re.match(r"24 tokens · [\d.]+ tok/s · \d+ prompt tokens, \d+ cached · length", stats), stats

    page.fill("#max_tokens", "4000")  # long enough to still be running when Stop is pressed
    page.fill("#prompt", "Tell me everything about Python.")
    page.press("#prompt", "Enter")
    page.wait_for_selector(".assistant:nth-of-type(4) .text:not(:empty)", timeout=60_000)
    page.click("#stop")
    page.wait_for_selector(".assistant:nth-of-type(4) .stats[data-done]", timeout=30_000)
    assert page.inner_text(".assistant:nth-of-type(4) .stats") == "stopped"
    page.screenshot(path=str(SHOTS / "stopped.png"))
    for _ in range(100):  # the engine cancelled it: nothing left running
        metrics = httpx.get(f"{demo_server.url}/metrics").text
        if re.search(r"^fs:num_requests_running 0\.0$", metrics, re.M):
            break
        page.wait_for_timeout(100)
    else:
        pytest.fail("the stopped request is still running")

    model, tok = tiny
    scripted = Scripted(model, tok.token_to_id("<|im_end|>"))
    s = start(scripted, tok)
    try:
        ask = [{"role": "user", "content": "hi"}]
        scripted.prompt_len = len(tok.apply_chat_template(ask, add_generation_prompt=True, tokenize=True))
        scripted.script = tok.encode("<think>\nThe user greets me.\n</think>\n\nHello there!")
        page.goto(s.url + "/")
        page.fill("#system", "")
        page.fill("#prompt", "hi")
        page.press("#prompt", "Enter")
        page.wait_for_selector(".assistant .stats[data-done]", timeout=60_000)
        think = page.locator(".assistant details.think")
        assert think.is_visible() and think.get_attribute("open") is None  # shown, folded
        assert think.locator("div").text_content() == "\nThe user greets me.\n"  # in the DOM, folded away
        assert page.inner_text(".assistant .text") == "Hello there!"
        page.screenshot(path=str(SHOTS / "thinking.png"))
    finally:
        s.stop()
