"""The broker's metrics: counters kept on the request path, exposed for Prometheus to scrape."""
