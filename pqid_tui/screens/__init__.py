"""The app's screens: home, new run, run monitor, payload inspector, credentials, replay."""
