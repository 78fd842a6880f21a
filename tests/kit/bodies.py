"""Request bodies the tests lint."""

# hang-retry as the text "True" (the platform reads only "true") and an integer where a string is due
BAD_BODY = """{
  "kind": "job",
  "metadata": {
    "name": "demo",
    "annotations": {
      "fault-tolerance/job-retry-num": 3,
      "fault-tolerance/hang-retry": "True"
    }
  },
  "algorithm": {"outputs": [{"name": "ckpt", "remote": {"obs": {"obs_url": "obs://b/ckpt/"}}}]},
  "spec": {"resource": {"node_count": 1}}
}
"""
