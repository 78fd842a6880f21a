from hacfg.entry import run

run()
