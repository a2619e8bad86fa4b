"""The console's reverse DNS cache: answers never wait for the resolver, lookups are bounded in
time, answers expire. The loopback address goes through this machine's real resolver; the
timeout and expiry cases use a resolver the test holds back (a DNS server that does not answer
is not something a test can order up)."""

from __future__ import annotations

import socket
import threading
import time

from kaflet.manager.hostnames import HostName, HostNames


def test_loopback_resolves_as_the_system_resolver_says() -> None:
    expected, _, _ = socket.gethostbyaddr("127.0.0.1")
    names = HostNames(timeout_s=10)
    try:
        assert names.lookup(["127.0.0.1"]) == {"127.0.0.1": HostName("127.0.0.1", None, "resolving")}
        assert names.wait(["127.0.0.1"], 15)
        answer = names.lookup(["127.0.0.1"])["127.0.0.1"]
        assert answer == HostName("127.0.0.1", expected, "") and answer.text == expected
    finally:
        names.close()


def test_text_that_is_no_ip_address_is_not_looked_up() -> None:
    asked: list[str] = []

    def resolver(ip: str) -> tuple[str, list[str], list[str]]:
        asked.append(ip)
        return "x", [], [ip]

    names = HostNames(resolver=resolver)
    try:
        got = names.lookup(["example.com", "10.0.0.1; rm -rf /"])
        assert {ip: h.text for ip, h in got.items()} == {"example.com": "(not an IP address)",
                                                         "10.0.0.1; rm -rf /": "(not an IP address)"}
        assert names.wait(["example.com"], 1) and asked == []
    finally:
        names.close()


def test_a_resolver_that_hangs_never_holds_up_a_lookup_and_times_out() -> None:
    release = threading.Event()
    calls: list[str] = []

    def hanging(ip: str) -> tuple[str, list[str], list[str]]:
        calls.append(ip)
        release.wait(30)
        return f"late-{ip}", [], [ip]

    names = HostNames(resolver=hanging, timeout_s=0.2, max_in_flight=2)
    try:
        # lookup() answers from the cache while the resolver hangs.
        assert names.lookup(["192.0.2.1"])["192.0.2.1"].note == "resolving"
        assert names.wait(["192.0.2.1"], 10)
        assert names.lookup(["192.0.2.1"])["192.0.2.1"] == HostName("192.0.2.1", None, "no answer in 0.2 s")
        # Queued again only after the failure's TTL: no new call now.
        assert calls == ["192.0.2.1"]
        # A late answer still lands in the cache.
        release.set()
        names.lookup([])
        for _ in range(100):
            if names.lookup(["192.0.2.1"])["192.0.2.1"].name:
                break
            time.sleep(0.05)
        assert names.lookup(["192.0.2.1"])["192.0.2.1"].name == "late-192.0.2.1"
    finally:
        release.set()
        names.close()


def test_answers_and_failures_expire_after_their_ttl() -> None:
    now = [1000.0]
    answers = {"192.0.2.7": "first.example"}
    calls: list[str] = []

    def resolver(ip: str) -> tuple[str, list[str], list[str]]:
        calls.append(ip)
        if ip not in answers:
            raise socket.herror(1, "Unknown host")
        return answers[ip], [], [ip]

    names = HostNames(resolver=resolver, ttl_s=600, failure_ttl_s=60, clock=lambda: now[0])
    try:
        names.lookup(["192.0.2.7", "192.0.2.8"])
        assert names.wait(["192.0.2.7", "192.0.2.8"], 10)
        got = names.lookup(["192.0.2.7", "192.0.2.8"])
        assert (got["192.0.2.7"].name, got["192.0.2.8"].text) == ("first.example", "(no name)")
        now[0] += 61  # the failure expired, the answer not: only the failed address is asked again
        answers["192.0.2.8"], answers["192.0.2.7"] = "second.example", "renamed.example"
        assert names.lookup(["192.0.2.7", "192.0.2.8"])["192.0.2.8"].text == "(no name)"  # stale until answered
        for _ in range(200):
            if names.lookup(["192.0.2.8"])["192.0.2.8"].name:
                break
            time.sleep(0.05)
        assert names.lookup(["192.0.2.8"])["192.0.2.8"].name == "second.example"
        assert names.lookup(["192.0.2.7"])["192.0.2.7"].name == "first.example"
        assert calls.count("192.0.2.7") == 1 and calls.count("192.0.2.8") == 2
        now[0] += 600  # now the answer expired too
        names.lookup(["192.0.2.7"])
        for _ in range(200):
            if names.lookup(["192.0.2.7"])["192.0.2.7"].name == "renamed.example":
                break
            time.sleep(0.05)
        assert names.lookup(["192.0.2.7"])["192.0.2.7"].name == "renamed.example"
    finally:
        names.close()
