"""cluster-unreachable (smoke): nothing listens at --address; a reachable cluster is no finding."""


def test_connection_refused_is_named(smoke_unreachable):
    (finding,) = smoke_unreachable.findings("cluster-unreachable")
    assert finding["severity"] == "error"
    assert "nothing answers at 127.0.0.1:" in finding["message"]
    assert finding["evidence"][0]["excerpt"].startswith("TCP connect to 127.0.0.1:")
    assert "ray status" in finding["fix"]


def test_near_miss_a_local_instance_that_starts(smoke_cpu):
    assert not smoke_cpu.findings("cluster-unreachable")


def test_the_rule_page_example_is_what_smoke_says(smoke_unreachable):
    from smoke_runs import assert_matches_doc_example

    assert_matches_doc_example("cluster-unreachable", smoke_unreachable)
