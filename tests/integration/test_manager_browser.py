"""The console in a real headless browser (Debian's chromium and chromium-driver, Selenium 4):
the same journey as the end-to-end test, by clicks. An admin registers the cluster and creates
accounts; a user creates an application and asks for produce; an operator approves, sets a
quota and revokes, while a confluent-kafka producer logged in as the application writes, is
held to the quota and is refused; the cluster's page and the topic's page (rate chart, live
connections) show what the broker holds. Screenshots of the main pages go to the test's temp dir, or
with KAFLET_SCREENSHOTS=docs/images to the ones the docs show (so a test run leaves the tree clean).
Without Debian's chromium and chromium-driver the test fails, saying what to install.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess, running_broker
from tests.support.manager import (
    CLUSTER_ID,
    ManagerProcess,
    app_client_config,
    gateway_broker_overrides,
    produce_once,
    refused,
    running_manager,
    wait_for,
)
from tests.support.quotas import MB, MeasuredProducer
from tests.support.topics import create_topic

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
REPO = Path(__file__).resolve().parents[2]
TOPIC = "payments"



@pytest.fixture
def images(tmp_path: Path) -> Path:
    chosen = os.environ.get("KAFLET_SCREENSHOTS")
    return REPO / chosen if chosen else tmp_path / "screenshots"


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[object]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail("the browser test needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1280,1000"):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(tmp_path / "chromium-profile", ignore_errors=True)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[ManagerProcess]:
    with running_manager(tmp_path / "manager", cluster_sample_interval_s=1) as m:
        yield m


@pytest.fixture
def broker(tmp_path: Path, manager: ManagerProcess) -> Iterator[BrokerProcess]:
    with running_broker(tmp_path / "broker" / "data", gateway_broker_overrides(manager.gateway_url)) as b:
        create_topic(b.bootstrap, TOPIC, partitions=2)
        yield b


def gone(element: object) -> bool:
    """True once ``element`` left the document. chromedriver says so either as a stale element
    or, now and then, as "Node with given id does not belong to the document"."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()  # type: ignore[attr-defined]
    except StaleElementReferenceException:
        return True
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise
    return False


class Console:
    """Clicks and typing on the console pages."""

    def __init__(self, driver: object, url: str, images: Path) -> None:
        self.d = driver
        self.url = url
        self.images = images

    def by_id(self, element_id: str) -> object:
        from selenium.webdriver.common.by import By
        return self.d.find_element(By.ID, element_id)  # type: ignore[attr-defined]

    def type(self, element_id: str, text: str) -> None:
        field = self.by_id(element_id)
        field.clear()  # type: ignore[attr-defined]
        field.send_keys(text)  # type: ignore[attr-defined]

    def choose(self, element_id: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select
        Select(self.by_id(element_id)).select_by_value(value)

    def click(self, element_id: str) -> None:
        """Click a button or link that loads a page, and wait until the new page is there
        (a click returns before the browser has navigated)."""
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.d.find_element(By.TAG_NAME, "html")  # type: ignore[attr-defined]
        for attempt in range(5):
            try:
                self.by_id(element_id).click()  # type: ignore[attr-defined]
                break
            except (StaleElementReferenceException, WebDriverException) as e:
                # chromedriver now and then loses the node it just found ("Node with given id
                # does not belong to the document") before the click is dispatched; the page
                # has not navigated, so finding the element again and clicking is safe.
                stale_node = isinstance(e, StaleElementReferenceException) or "does not belong to the document" in str(e)
                if not stale_node or attempt == 4:
                    raise
                if gone(old):
                    break  # the click got through after all: the page has gone
                time.sleep(0.2)
        WebDriverWait(self.d, 30).until(lambda _: gone(old))

    def go(self, path: str) -> None:
        self.d.get(self.url + path)  # type: ignore[attr-defined]

    @property
    def page(self) -> str:
        return str(self.d.page_source)  # type: ignore[attr-defined]

    def shot(self, name: str) -> None:
        self.images.mkdir(parents=True, exist_ok=True)
        # The whole page, not just the window: grow the window to the document's height.
        height = int(self.d.execute_script("return document.documentElement.scrollHeight"))  # type: ignore[attr-defined]
        self.d.set_window_size(1280, min(max(height, 700), 4000))  # type: ignore[attr-defined]
        self.d.save_screenshot(str(self.images / f"manager-{name}.png"))  # type: ignore[attr-defined]
        self.d.set_window_size(1280, 1000)  # type: ignore[attr-defined]

    def login(self, username: str, password: str) -> None:
        self.go("/login")
        self.type("username", username)
        self.type("password", password)
        self.click("login")
        assert "Welcome, " + username in self.page, self.page[:2000]

    def logout(self) -> None:
        self.click("logout")
        assert "Log in" in self.page


def test_the_console_by_clicks(driver: object, manager: ManagerProcess, broker: BrokerProcess, images: Path) -> None:
    assert manager.admin_password
    ui = Console(driver, manager.url, images)
    bootstrap = broker.bootstrap_for("SASL_PLAINTEXT")

    ui.go("/login")
    ui.shot("login")
    ui.login("admin", manager.admin_password)
    ui.go("/clusters")
    ui.type("cluster-name", "payments-cluster")
    ui.type("cluster-id", str(CLUSTER_ID))
    ui.type("cluster-bootstrap", broker.bootstrap)
    ui.click("register-cluster")
    assert "payments-cluster" in ui.page
    ui.shot("clusters")
    ui.go("/accounts")
    for name, role in (("alice", "user"), ("oscar", "operator")):
        ui.type("new-username", name)
        ui.type("new-password", f"{name}-password-1")
        ui.choose("new-role", role)
        ui.click("create-account")
        assert f"<td>{name}</td><td>{role}</td>" in ui.page, ui.page[-3000:]
    ui.shot("accounts")
    ui.logout()

    # A user creates an application (its password is shown once) and asks to produce.
    ui.login("alice", "alice-password-1")
    ui.go("/apps")
    ui.type("app_id", "payments_app")
    ui.type("description", "writes payment events")
    ui.click("create-app")
    password = ui.by_id("app-password").text  # type: ignore[attr-defined]
    assert len(password) == 24
    ui.shot("app-created")
    ui.click("to-app")
    assert password not in ui.page
    ui.type("req-topic", TOPIC)
    ui.choose("req-access", "2")
    ui.type("req-reason", "payment events")
    ui.click("request-permission")
    assert "pending" in ui.page
    wait_for(lambda: refused(produce_once(bootstrap, "payments_app", password, TOPIC)))
    ui.logout()

    # An operator approves: the producer writes.
    ui.login("oscar", "oscar-password-1")
    ui.go("/requests")
    ui.shot("requests")
    request_id = re.search(r'id="approve-(\d+)"', ui.page)
    assert request_id
    ui.click(f"approve-{request_id.group(1)}")
    wait_for(lambda: produce_once(bootstrap, "payments_app", password, TOPIC) is None)

    # The operator sets a 1 MB/s produce quota: the producer is held to it.
    ui.go("/apps/payments_app")
    ui.type("quota-topic", TOPIC)
    ui.type("quota-produce", str(MB))
    ui.click("set-quota")
    assert "1,048,576" in ui.page
    config = app_client_config(bootstrap, "payments_app", password)
    producer = MeasuredProducer(config.pop("bootstrap.servers"), "rdkafka", TOPIC, {**config, "batch.size": 262144})
    try:
        producer.run(3)
        rate = producer.run(10)
    finally:
        producer.close()
    print(f"\npayments_app under a 1 MB/s quota set by clicks: {rate:.3f} MB/s")
    assert 0.5 <= rate <= 1.2
    wait_for(lambda: (ui.go("/apps/payments_app"), "127.0.0.1" in ui.page.split("Live connections")[1])[1])
    ui.shot("app")

    # The cluster's page lists the topic; its page has the rate chart and the live producer.
    ui.go(f"/clusters/{CLUSTER_ID}")
    assert f'id="topic-{TOPIC}"' in ui.page and "controller" in ui.page
    ui.shot("cluster")
    # The topic filter is a plain GET form: typing a part of the name and submitting lists that topic.
    ui.type("topics-q", TOPIC[:5].upper())
    ui.click("topics-filter-go")
    listed = ui.page.split('id="topics"')[1].split("</table>")[0]
    assert re.findall(r'id="topic-([^"]+)"', listed) == [TOPIC]
    assert f"Topics 1-1 of 1 whose name contains “{TOPIC[:5].upper()}”" in ui.page
    ui.click(f"topic-{TOPIC}")
    assert "<svg" in ui.page and "<circle" in ui.page.split('id="rate-chart"')[1]
    assert "payments_app" in ui.page.split('id="connections"')[1].split("</table>")[0]
    # The producer's address with the name this machine's resolver gives it (resolved in the background).
    host, _, _ = socket.gethostbyaddr("127.0.0.1")
    wait_for(lambda: (ui.go(f"/clusters/{CLUSTER_ID}/topics/{TOPIC}"),
                      f"<td>{host}</td>" in ui.page.split('id="connections"')[1].split("</table>")[0])[1])
    ui.shot("topic")

    # Revoked by a click: the producer is refused.
    ui.go("/apps/payments_app")
    ui.click(f"revoke-{TOPIC}-2")
    assert "No permissions." in ui.page
    wait_for(lambda: refused(produce_once(bootstrap, "payments_app", password, TOPIC)))
    ui.go("/audit")
    for action in ("app.create", "permission.request", "permission.approve", "quota.set", "permission.revoke"):
        assert action in ui.page
    ui.shot("audit")
