"""knapd refuses a bad config file at start, naming the key and the reason."""
import pytest

from conftest import Knapd


@pytest.mark.parametrize("section,needle", [
    ("autoscaler:\n  stable-window: 2s\n", "autoscaler.stable-window"),
    ("defaults:\n  revision-timeout-seconds: \"900\"\n", "revision-timeout-seconds"),
    ("network:\n  domain-template: \"{{.Bogus}}\"\n", "network.domain-template"),
    ("nonsense:\n  x: 1\n", "nonsense"),
])
def test_bad_config_is_refused_with_key(workdir, section, needle):
    k = Knapd(workdir, extra_config=section)
    with pytest.raises(RuntimeError) as err:
        k.start(timeout=10)
    text = str(err.value)
    assert "refusing to start" in text and needle in text, text
    assert text.count("config file") == 1, text
