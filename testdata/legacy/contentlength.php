<?php
header('Content-Type: application/octet-stream');
header('Content-Disposition: attachment; filename="report.csv"');
$csv = "id,name\n1,alpha\n2,beta\n";
header('Content-Length: ' . strlen($csv));
echo $csv;
