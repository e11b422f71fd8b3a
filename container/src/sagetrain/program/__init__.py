"""3. program: the user's code, prepared on every host before the launch: where it is (``code.py``, an
archive unpacked by ``archive.py``), what it needs installed, what kind of program it is and the argv
each rank runs (``kind.py``)."""
