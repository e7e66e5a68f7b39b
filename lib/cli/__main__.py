from topiclake.cli import app

app()
