<?php
// Written for the CLI runtime's helpers; under the native runtime they are PHP's own.
Peregrine\Http\header('X-Lib: 1');
Peregrine\Http\header('X-Gone: 1');
Peregrine\Http\header_remove('X-Gone');
echo json_encode([Peregrine\Http\input(), Peregrine\Http\headers_list()]);
