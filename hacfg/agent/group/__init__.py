"""The agents of one job as one group: how it is found (:mod:`.discovery`), the sockets under its
store (:mod:`.transport`), the signing of every value in it (:mod:`.signing`), and the rounds it
runs through the store (:mod:`.protocol`)."""
