from hacfg.cli.main import run

run()
