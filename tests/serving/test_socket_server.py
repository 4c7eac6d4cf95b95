"""`python -m mediator_project.socket_server`, how every layout starts Daphne: its WebSocket message
limits are above the application's body cap, so that the cap governs (the real frames are sent in
tests/didcomm/app/test_e2e_socket_frames.py), and an option given on the command line still wins."""

from __future__ import annotations

from mediator_project import socket_server


def test_daphnes_message_limits_are_twice_the_body_cap(settings):
    settings.MEDIATOR_MAX_BODY_BYTES = 6 * 1024 * 1024
    assert socket_server.arguments(["-b", "127.0.0.1", "-p", "8001"]) == [
        "--websocket-max-message-size",
        str(12 * 1024 * 1024),
        "--websocket-max-frame-size",
        str(12 * 1024 * 1024),
        "-b",
        "127.0.0.1",
        "-p",
        "8001",
        "mediator_project.asgi:application",
    ]


def test_options_and_an_application_given_on_the_command_line_come_last_and_win(settings):
    args = socket_server.arguments(["--websocket-max-message-size", "5", "other.asgi:application"])
    assert args[-3:] == ["--websocket-max-message-size", "5", "other.asgi:application"]
    assert args.count("mediator_project.asgi:application") == 0
