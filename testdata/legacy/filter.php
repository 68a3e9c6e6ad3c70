<?php
header('Content-Type: text/plain');
var_dump(filter_input(INPUT_GET, 'id', FILTER_VALIDATE_INT));
var_dump(filter_input(INPUT_GET, 'email', FILTER_VALIDATE_EMAIL));
var_dump(filter_input(INPUT_GET, 'missing'));
var_dump(filter_input(INPUT_POST, 'age', FILTER_VALIDATE_INT, ['options' => ['min_range' => 18]]));
var_dump(filter_input(INPUT_POST, 'tags', FILTER_DEFAULT, FILTER_REQUIRE_ARRAY));
var_dump(filter_input(INPUT_COOKIE, 'theme', FILTER_SANITIZE_SPECIAL_CHARS));
var_dump(filter_input(INPUT_SERVER, 'REQUEST_METHOD'));
var_dump(filter_input(INPUT_SERVER, 'HTTP_X_CLIENT'));
var_dump(filter_has_var(INPUT_GET, 'id'), filter_has_var(INPUT_POST, 'id'));
var_dump(filter_input_array(INPUT_GET, ['id' => FILTER_VALIDATE_INT, 'flag' => FILTER_VALIDATE_BOOLEAN]));
