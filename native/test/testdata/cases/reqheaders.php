<?php
// peregrine_request_headers(): the request's headers as sent, a repeated one as a list.
echo json_encode(peregrine_request_headers());
