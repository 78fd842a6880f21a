from hacfg.main import run

run()
